"""`python -m warren` starts a node, exactly as `warren-server` does."""

from warren.launch import main

main()
