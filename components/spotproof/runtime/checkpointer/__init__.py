"""Checkpoints that survive preemption: the commit protocol and everything it rests on.

- ``layout``: where a checkpoint's objects live under a store's prefix (the one place that
  names the keys; ``spotproof plan``'s lifecycle replay reads it too);
- ``manifest``: the object whose existence commits a step, and its format;
- ``integrity``: CRC32C of every part;
- ``transfer``: a checkpoint's blobs moved to and from a store as parts, in parallel;
- ``reading``: parts read back to where their bytes go, each verified where it landed;
- ``checkpoint``: the commit protocol (payload, then a create-only manifest) and restore;
- ``gang``: N ranks' shards committed as one step;
- ``tiers``: a gang's saves held in each node's memory and replicated to a peer, persisted
  to the bucket every few saves; what a restart chooses among them;
- ``async_save``: periodic saves in the background, the final one on preemption;
- ``torch_state``: PyTorch training state as blobs, one copy, no pickled tensor data;
- ``in_place``: a restore straight into the model's and the optimizer's tensors.

The stores themselves are ``spotproof.runtime.storage``.
"""
