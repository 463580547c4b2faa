"""Running work on a distributed engine (Ray) instead of one process; Ray is an optional extra."""
