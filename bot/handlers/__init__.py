"""One module per feature, each with its own router; bot.handlers.routes composes them."""
