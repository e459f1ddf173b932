from impyard.cli.entry import main

main()
