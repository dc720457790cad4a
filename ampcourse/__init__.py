"""ampcourse: helpers, widgets and graders for the mixed-precision training course."""

__version__ = "0.1.0"
