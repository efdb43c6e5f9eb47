"""The pilot: the worker-node agent, Machine/Job Features, and pilot provisioning (site directors)."""
