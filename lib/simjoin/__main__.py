"""``python -m simjoin``: the ``simjoin`` command."""

from simjoin.cli import main

main()
