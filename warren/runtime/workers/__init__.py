"""A node of several worker processes (issue 19): the layout every worker derives its own
settings from (`layout`) and the supervisor that runs them (`supervisor`)."""
