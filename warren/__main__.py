"""`python -m warren` starts a node, exactly as `warren-server` does."""

from warren.server import main

main()
