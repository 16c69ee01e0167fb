"""What ``spotproof plan`` reads before it runs anything: the Pulumi project on disk
(``project``), the stack's config as the engine hands it to the program (``stack``), and
the line each value was written on (``sources``)."""
