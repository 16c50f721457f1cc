"""Screens: the main screen (the console itself) and the modal ones (help, confirmation,
action progress)."""
