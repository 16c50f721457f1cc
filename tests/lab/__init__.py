"""The sparktui test lab: N simulated GPU nodes (netns + real sshd + real dockerd) with a
real Ray cluster across them, on one Linux machine. See tests/lab/README.md."""
