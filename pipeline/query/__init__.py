"""Named SQL in queries/ and ad-hoc SQL over the warehouse views."""
