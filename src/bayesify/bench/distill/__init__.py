"""Distilled students against their teachers: ``bayesify bench distill``."""
