"""The rehearsals of the reference trainer, one module per kind: alone (``solo``), as a
gang (``gang``, with ``gang_faults``), as a gang replaced rank by rank (``tiered``),
queue-fed batch workers (``batch``), and along a stack's preemption path (``stack``)."""
