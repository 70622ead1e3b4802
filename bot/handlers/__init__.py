"""One module per feature, each with its own router; bot.routing composes them."""
