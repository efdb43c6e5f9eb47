"""The API's routers, one module per concept (requests, jobs, lifecycle, pilots, shares, admin). A new concept
adds its module here and to :func:`matcher.api.app.create_app`'s list; a route that changes anything is a POST,
which the tests check answers 401/403 without a token."""
