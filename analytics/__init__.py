"""Analytics: formulas (pure functions), run summaries, tables and charts."""
