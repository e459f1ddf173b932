from impyard.cli.main import main

main()
