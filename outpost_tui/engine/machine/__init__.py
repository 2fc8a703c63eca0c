"""The machine the races run on: `doctor` checks git, the agents' programs and credentials, the
container engine and the sandbox support, and says what to fix. Each finding is a `check.Check`;
`containers` holds the checks that ask the container engine and probe the race's image.
"""
