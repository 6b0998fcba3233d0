"""Developer tools the Makefile calls (make bench, make gate-check): not part of the installed package."""
