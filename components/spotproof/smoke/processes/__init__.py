"""The rehearsal's trainer processes: one read by its events, forked warm, one lineage
after another, a gang's ranks, a gang's pods under torchrun's elastic agents, and a hard
kill aimed between a checkpoint's payload and its commit."""
