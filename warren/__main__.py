"""`python -m warren` starts a node, exactly as `warren-server` does."""

from warren.runtime.main import main

main()
