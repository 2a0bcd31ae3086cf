"""What runs in the step image, in each step's pod: the entrypoint the compiled spec starts, the
executors' wrappers, the Beam step, the run lease's and the exit step's parts, the step records."""
