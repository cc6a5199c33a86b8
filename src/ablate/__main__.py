from ablate.cli import app

app(prog_name="ablate")
