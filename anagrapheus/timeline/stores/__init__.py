"""Where the log lives: the store ports, SQLite and PostgreSQL, and what every store shares."""
