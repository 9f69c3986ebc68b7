"""Builders of tiny random-weight models of each family, shared by adapter and HTTP tests."""
