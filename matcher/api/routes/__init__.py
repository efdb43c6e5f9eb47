"""The API's routers, one module per concept (requests, jobs, pilots, shares, admin). A new concept (the
lifecycle commands, history) adds its module here and to :func:`matcher.api.app.create_app`'s list; a route that
changes anything is a POST, which the tests check answers 401/403 without a token."""
