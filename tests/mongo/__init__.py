"""MongoStore specifics against a real server (docs/design.md#mongo-store): FerretDB started by
the tests, or ``$MONGODB_URI``. What every store shares is in the conformance suite."""
