"""What the command lines share (the gateway's commands and the Spark job's own entry point):
exit codes and aligned text tables. Imports nothing of the project."""
