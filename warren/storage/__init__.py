"""Durable storage: the node's write-ahead log, queue records over it, definitions store.

Import only `warren.errors` and the standard library; never asyncio. See the modules:
`log` (segmented log with CRCs and group commit), `messages` (classic queue records and the
recovery fold), `journal` (which records are live; retire and compaction for the log),
`definitions` (SQLite store of vhosts, users, exchanges, queues, bindings, policies).
"""
