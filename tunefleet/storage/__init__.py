"""Durable storage: peewee models, database opening, migrations, the writes actors ask for."""
