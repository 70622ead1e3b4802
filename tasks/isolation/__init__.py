"""Running untrusted processes: the sandbox, its egress proxy, network namespace, cgroups."""
