"""What a race leaves behind to be read later: the flight log of every event as JSON lines
(`flightlog`), recorded races read back for `history` and `show` (`history`), and a finished race
for people, leaderboard and Markdown report (`report`).
"""
