"""Queues in the runtime: one interface (`QueueHost`), its typed outcomes, the classic host,
the one effect interpreter, paging and dead-lettering.

`warren.runtime.queues.host` says how channels and hosts meet; the quorum and remote hosts
implement the same interface in `warren.runtime.cluster` (this package never imports it).
"""
