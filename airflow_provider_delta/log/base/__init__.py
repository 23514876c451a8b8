"""what every module may use: the named errors, argument checks, Arrow helpers, secret forms."""
