"""`simjoin <pipeline>` commands (ssj, s3j, report), registered on the main Typer app."""

from __future__ import annotations
