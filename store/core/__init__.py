"""What both backends share through SQLAlchemy Core: schema, writes, review, listing, erasure, recall."""
