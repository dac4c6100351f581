"""Dashboard views, one module per page (STYLE §9): permission, scoped fetch (404 for what the
caller may not see), selector, chart builder, render. Writes go through the services with the
user's ApiClient and a HUMAN_USER actor; every POST is CSRF-protected and checks the role here, not
in the template. ``common`` holds what several pages use; ``dashboard/urls.py`` maps the paths.
"""
