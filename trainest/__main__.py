from trainest.cli.main import main

main()
