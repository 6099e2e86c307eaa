"""Command-line tools that run the tracker core without ROS (offline video / image folders).

Every error a user can cause (a bad prompt file, an unreadable input, a missing checkpoint) is
a :class:`CliError`: the tools print its message and exit with status 2, never a traceback.
"""


class CliError(Exception):
    """A user error: the message says what is wrong and where; the tool exits with status 2."""
