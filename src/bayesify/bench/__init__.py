"""Experiments on real data: UCI regression, images, speed; results tables and stores."""
