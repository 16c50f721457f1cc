"""The console's widgets."""
