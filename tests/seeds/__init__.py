"""The seeds as an executable specification: one module per reference page, one test per behaviour it states (#40)."""
