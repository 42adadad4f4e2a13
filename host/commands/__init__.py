"""The commands of ``trainingcxl``, one module each (the shape of Glasgow's applets): a
module's ``register(sub)`` declares its arguments on the subparsers ``sub`` and the
function that builds its job, runs it and prints its summary. A new command is one
new module and one line in :data:`trainingcxl.host.cli.COMMANDS`."""
