"""The pure side of a cluster: node identities, membership, placement. No I/O."""
