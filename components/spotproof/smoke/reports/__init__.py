"""What a rehearsal records and tells: its configuration and records, what a person
reads, and the verdict a drill would give."""
