"""``spotproof status``: what a deployed stack's workloads are doing on spot, right now.

One read of the cluster, through the kubeconfig the stack outputs, and one of the checkpoint
store at its ``checkpoint_url`` output; nothing is changed. Per workload the stack renders
(the smoke Job, TrainingJobs and their JobSets, batch-worker Deployments; ``workloads``):

- each pod's phase, node, the node's pool and capacity (spot, on-demand, flex-start:
  ``nodes``), and restarts (``pods``);
- how long a Pending pod has waited and the scheduler's reason, and for a Job queued in
  Kueue (GKE queued provisioning included) its admission state (``queueing``);
- reclaims seen: pods ended by a reclaim or a drain (``DisruptionTarget``, exit 143) and
  what the Job counted against its failure budget;
- the last committed checkpoint and its age (``checkpoints``).

Ages are taken on the API server's clock (its ``Date`` header), so a laptop's skew does not
shift them. ``cluster`` reads; ``report`` renders text and JSON; ``command`` is the CLI's.
"""
