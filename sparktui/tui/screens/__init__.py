"""Modal screens: help, confirmation, action progress."""
