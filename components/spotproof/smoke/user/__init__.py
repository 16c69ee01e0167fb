"""``spotproof smoke --command``: a user's own trainer rehearsed, alone, as a gang, or as a
gang replaced rank by rank, and a digest that differs explained."""
