"""The node-to-node side of a cluster: the transport between nodes and the Raft host."""
