"""The application layer: jobs that the CLI (and the server) run on named datasets."""
