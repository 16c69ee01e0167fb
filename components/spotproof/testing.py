"""Unit-test your own Pulumi program that uses spotproof's components, without a cloud.

``record`` runs a program in-process under ``pulumi.runtime.set_mocks`` with mocks that
answer like the clouds do for what spotproof's components read back (a cluster's
endpoint, a service account's email, an AWS account id), and returns every registration
with its inputs and parent. It is what ``spotproof plan`` runs on, offered for your tests::

    from spotproof.testing import record

    def program() -> None:
        GpuNodePools("gpu", GpuNodePoolsArgs(cluster_name="ml", ...))

    recording = record(program, stack="dev", project="ml-infra")
    pools = recording.of_type("gcp:container/nodePool:NodePool")
    assert pools[0].inputs["nodeConfig"]["spot"] is True

Inputs are recorded as the engine would pass them to a provider, with camelCase keys;
whole numbers come back as ``int`` (the wire carries them as floats), secrets wrapped in
:class:`Secret`. A value unknown until deploy (an output of a ``StackReference``, say) is
recorded as ``pulumi.output.Unknown``, whatever a mock derives from it stays unknown, and
an exported output that is unknown reads back as ``None``. One program runs at a time per
process.
"""

from spotproof.plan.recording.offline import OfflineCloud
from spotproof.plan.recording.recorder import Recording, Resource, Secret, record

__all__ = ["OfflineCloud", "Recording", "Resource", "Secret", "record"]
