"""``spotproof drill``: a real reclaim of a real spot node, and a verdict on the recovery.

``spotproof smoke`` proves the recovery path against emulators on one machine; a drill proves
it on the cluster a stack deployed, where the offline model can still be wrong. It asks the
cloud itself to reclaim the node under a running trainer, through the API each cloud offers
for exactly this test, and never deletes pods or cordons nodes itself:

- Compute Engine ``instances.simulateMaintenanceEvent`` on a Spot VM (``reclaim.gke``);
- AWS Fault Injection Service ``aws:ec2:send-spot-instance-interruptions`` (``reclaim.eks``);
- Azure ``simulateEviction`` on a spot scale-set instance or VM (``reclaim.aks``).

The stages, each with a bounded wait and a one-line message when it runs out:

1. **target** (``target``): find the workload's pod running on a spot node, and map the
   node's ``spec.providerID`` to its cloud instance (``instances``);
2. **refuse** what is not ours to reclaim: a protected stack (or a ``--kubeconfig`` cluster
   whose outputs do not say it is disposable) without ``--yes``, a Kubernetes permission
   the drill will need and lacks (``access``), an instance that is not spot or not part of
   this cluster, a stack without the drill's grant (``grants``: the stack output ``drill``
   that ``drill.enabled`` adds);
3. **reclaim** through the cloud's API (``reclaim``), ``--count`` times;
4. **watch** the Kubernetes API (``watch``) and the checkpoint store, and record a
   ``timeline.Timeline``: notice, ``DisruptionTarget``, SIGTERM as the trainer reports it,
   the final checkpoint committed, the node gone, the replacement's scheduling and resume;
5. **judge** the timeline (``judge``), the same code that judges a local rehearsal, and
   **compare** it with the preemption path ``spotproof plan`` predicted (``compare``).
"""
