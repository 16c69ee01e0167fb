"""What a rehearsal stands in for on one machine: the object-store, queue and database
emulators on loopback, a fault-injecting proxy in front of them, and the Job controller's
verdict on a failed pod."""
