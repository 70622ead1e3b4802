"""jam.dev bug reports: receive Jam's webhook, route the report, open its issue."""
