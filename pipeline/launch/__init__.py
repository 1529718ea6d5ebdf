"""Launching a run: the Beam arguments and the runner, a local run's worker processes forked from
the launcher (their socket checked, their deaths watched, their ends reaped), and a cluster's
workers watched until they start."""
