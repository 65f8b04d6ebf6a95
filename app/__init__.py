"""lastword: keeps a subagent's last word."""

__version__ = "0.1.0"
