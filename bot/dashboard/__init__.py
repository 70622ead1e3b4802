"""The operator's dashboard: server-rendered pages behind a GitHub sign-in.

`bot.dashboard.pages.init_app` serves it; `signin` decides who sees what.
"""
