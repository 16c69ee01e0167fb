"""What the platform would do with the recorded stack, rule by rule from its sources.

- ``nodes``: the pools' nodes as the scheduler sees them, and how each pool gets nodes;
- ``workloads``: will each workload's pods fit a node at all;
- ``scale_up``: would an autoscaler create a node for it;
- ``admission``: would Kueue admit it, and who provisions its nodes;
- ``preemption``: when a reclaimed node's pods get SIGTERM, and with how much grace;
- ``reclaims``, ``termination``: how the pod's work ends, and whether its Job counts it;
- ``gpu_advertising``: which nodes offer their GPUs to pods;
- ``controller_versions``: which fields of each pinned controller's objects the release
  the stack installs would prune;
- ``outcomes``: the per-workload verdict that draws these together;
- ``pitfalls``, ``uniqueness``, ``reachability``, ``lifecycle``: a workload's known
  pitfalls, identities declared twice, an API server ``pulumi up`` cannot reach, and
  bucket lifecycle rules replayed against the runtime's checkpoint history.
"""
