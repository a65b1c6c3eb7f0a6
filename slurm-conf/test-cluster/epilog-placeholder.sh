#!/bin/sh
# JOBSCOPE-EPILOG-PLACEHOLDER
# Installed as /usr/local/sbin/jobscope-epilog by `slurm-conf/cluster.sh up` only because the
# real Epilog= program was not installed (a missing Epilog drains the node). It does nothing.
# Replace it with the real one: cargo build --release --workspace && slurm-conf/cluster.sh install
exit 0
